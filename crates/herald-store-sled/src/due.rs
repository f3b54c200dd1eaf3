//! The due index: which pending deliveries are due when, per endpoint, kept in memory.
//!
//! sled holds the durable truth (an event's fresh deliveries, the `pending` tree); polling it
//! would cost a scan per tick. The index is rebuilt from sled at start-up and then fed by
//! whoever makes a delivery due (the committer after an fsync, the engine after an attempt).
//!
//! Entries are grouped by *lane* (the endpoint they go to): [`DueIndex::take`] hands out the
//! earliest due entries across lanes, never more of a lane than its caller allows (the
//! scheduler's per-endpoint limit, less what it holds), and a lane held by its circuit breaker
//! hands out nothing until its hold ends. A dead endpoint's backlog therefore waits in its own
//! lane, costs nothing per tick, and never delays another endpoint's deliveries. The index only
//! counts what it handed out (a purge and the ordering need to know); how many of a lane may
//! be out at once is not its decision.
//!
//! Ordered endpoints (docs/delivery-contract.md): an entry may belong to a *sequence* of its lane
//! (the deliveries with one ordering key). Only a sequence's head is in the lane's queues; the
//! others wait in the sequence, in commit (ULID) order, and the next goes into the queues when the
//! head ends ([`DueIndex::ended`]): retries of the head hold back only its own key, and different
//! keys of a lane go in parallel (as many as a take allows). Lanes without sequences pay nothing
//! for them.
//!
//! Memory: an entry is 24 bytes (due time and delivery ULID). First attempts, which arrive in
//! time order, sit in a deque; retries and other later attempts in an ordered set. A sequence's
//! member costs about 60 bytes more.
//!
//! First attempts are most of a backlog (an endpoint that stopped answering collects them), so a
//! lane keeps at most [`LANE_FRESH`] of them in memory, fewer once all lanes together hold
//! [`ALL_FRESH`]: the newer ones *spill*: the lane counts them and remembers the oldest, and
//! they stay in sled only, where every fresh delivery is anyway. When the lane's deque runs low,
//! [`DueIndex::refills`] hands out a job to read the next ones back (the store walks the log
//! from the oldest spilled one, up to the newest counted when the job started) and
//! [`DueIndex::refilled`] takes them in. First attempts reach the index in ULID order (the
//! committer allocates ULIDs and commits one cycle at a time), so the spilled ones are always the
//! newest of their lane, and what a refill reads back is never in memory already. Entries of
//! ordered endpoints' sequences never spill.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Mutex;

use tokio::sync::Notify;

use herald_core::clock::Millis;
use herald_core::ids;
use herald_store::{Lane, NO_LANE};

/// The most fresh entries one lane keeps in memory: 4096 × 24 bytes.
const LANE_FRESH: usize = 4096;
/// Past this many fresh entries in memory across lanes, a lane with [`LANE_FLOOR`] spills too
/// (6 MiB of entries: a million pending first attempts cost what 262,144 do).
const ALL_FRESH: usize = 1 << 18;
/// The fewest fresh entries a lane keeps, or reads back, when memory is tight.
const LANE_FLOOR: usize = 256;
/// A lane with spilled entries asks for more when its deque is down to this.
const LANE_LOW: usize = LANE_FRESH / 4;

/// An entry to add: a delivery due at `at` to `lane`; `fresh` for its first attempt, due since
/// ingest; `sequence` names its sequence when its endpoint is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub lane: Lane,
    pub at: Millis,
    pub delivery: u128,
    pub fresh: bool,
    pub sequence: Option<u64>,
}

/// A due delivery handed out by [`DueIndex::take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    pub lane: Lane,
    pub at: Millis,
    pub delivery: u128,
    /// Its first attempt, due since ingest (as opposed to a retry or another later attempt).
    pub fresh: bool,
}

/// What waits in one lane ([`DueIndex::waiting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneWaiting {
    pub lane: Lane,
    pub waiting: u64,
    pub due: u64,
    pub behind: u64,
}

/// A fresh entry: (due time, delivery) in 24 bytes, not the 32 a `(Millis, u128)` takes (its
/// 16-byte alignment pads it): a million pending first attempts are a million of these.
#[derive(Clone, Copy)]
struct Slot {
    at: Millis,
    delivery: [u64; 2],
}

impl Slot {
    fn new(at: Millis, delivery: u128) -> Slot {
        Slot {
            at,
            delivery: [(delivery >> 64) as u64, delivery as u64],
        }
    }

    fn get(self) -> (Millis, u128) {
        let d = (u128::from(self.delivery[0]) << 64) | u128::from(self.delivery[1]);
        (self.at, d)
    }
}

/// A lane's fresh entries that are in sled only ([`DueIndex`], memory).
struct Spill {
    /// Every spilled entry is at or after this delivery (a refill reads from here).
    from: u128,
    /// The newest spilled entry.
    newest: u128,
    /// Spilled entries counted, less those read back; some may have ended meanwhile (a retry
    /// of one, retention): a refill that reads to its end corrects the count.
    out: usize,
    /// A refill under way: it reads up to `bound` (`newest` when it started); `since` counts
    /// the entries spilled since, all after it.
    refill: Option<(u128, usize)>,
}

/// A lane's next spilled fresh entries to read back: the fresh deliveries to `lane` from
/// delivery `from` to `bound`, at most `want` of them ([`DueIndex::refilled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refill {
    pub lane: Lane,
    pub from: u128,
    pub bound: u128,
    pub want: usize,
}

#[derive(Default)]
struct LaneQueue {
    fresh: VecDeque<Slot>,
    /// The newest delivery outside a sequence ever put at the back of `fresh`: a refill skips
    /// what is at or below it (in memory already).
    fresh_max: u128,
    spill: Option<Spill>,
    later: BTreeSet<(Millis, u128)>,
    /// The deliveries handed out and not yet given back.
    running: Vec<u128>,
    held_until: Option<Millis>,
    /// This lane's key in `ready`, if it has one.
    ready_at: Option<Millis>,
    /// An ordered endpoint's sequences: each one's deliveries in ULID (commit) order, the head
    /// first, as (due time, delivery, fresh). The head's own entry is in the queues above (or
    /// running); the others wait here.
    sequences: HashMap<u64, VecDeque<(Millis, u128, bool)>>,
    /// The sequence of each delivery in one.
    sequence_of: HashMap<u128, u64>,
}

impl LaneQueue {
    fn is_empty(&self) -> bool {
        self.fresh.is_empty()
            && self.later.is_empty()
            && self.sequences.is_empty()
            && self.spill.is_none()
    }

    /// Whether a new fresh entry for `delivery` goes to sled only (counted in the spill),
    /// with `total` fresh entries in memory across lanes.
    fn spills(&mut self, delivery: u128, total: usize) -> bool {
        match &mut self.spill {
            Some(s) if delivery >= s.from => {
                s.out += 1;
                s.newest = s.newest.max(delivery);
                if let Some((bound, since)) = &mut s.refill {
                    if delivery > *bound {
                        *since += 1;
                    }
                }
                true
            }
            // Older than what spilled (not the committer's order): kept in memory.
            Some(_) => false,
            None => {
                let n = self.fresh.len();
                let full = n >= LANE_FRESH || (total >= ALL_FRESH && n >= LANE_FLOOR);
                if full && delivery > self.fresh_max {
                    self.spill = Some(Spill {
                        from: delivery,
                        newest: delivery,
                        out: 1,
                        refill: None,
                    });
                }
                self.spill.is_some()
            }
        }
    }

    /// A refill of this lane's spilled entries, if it needs one now (it has spilled entries,
    /// few in memory, and no refill under way); marks it under way.
    fn refill_job(&mut self, lane: Lane, total: usize) -> Option<Refill> {
        let n = self.fresh.len();
        let s = self.spill.as_mut().filter(|s| s.refill.is_none())?;
        if n > LANE_LOW {
            return None;
        }
        s.refill = Some((s.newest, 0));
        Some(Refill {
            lane,
            from: s.from,
            bound: s.newest,
            want: (LANE_FRESH - n).min(ALL_FRESH.saturating_sub(total).max(LANE_FLOOR)),
        })
    }

    /// Deliveries waiting behind their sequence's head.
    fn waiting(&self) -> usize {
        self.sequence_of.len() - self.sequences.len()
    }

    fn earliest(&self) -> Option<Millis> {
        let f = self.fresh.front().map(|e| e.at);
        let l = self.later.first().map(|e| e.0);
        match (f, l) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn pop(&mut self) -> Option<(Millis, u128, bool)> {
        let f = self.fresh.front().map(|e| e.at);
        let l = self.later.first().map(|e| e.0);
        match (f, l) {
            (Some(a), Some(b)) if b < a => self.later.pop_first().map(|(t, d)| (t, d, false)),
            (Some(_), _) => self.fresh.pop_front().map(|e| {
                let (t, d) = e.get();
                (t, d, true)
            }),
            (None, Some(_)) => self.later.pop_first().map(|(t, d)| (t, d, false)),
            (None, None) => None,
        }
    }
}

#[derive(Default)]
struct Inner {
    lanes: HashMap<Lane, LaneQueue>,
    /// Each lane that has entries: (when its earliest entry may go, lane).
    ready: BTreeSet<(Millis, Lane)>,
    len: usize,
    /// Fresh entries in memory, all lanes.
    fresh_total: usize,
    /// Refills to hand out ([`DueIndex::refills`]).
    refills: Vec<Refill>,
    /// Lanes of purged accounts: each one's entries of events up to this ULID are gone with
    /// their events, and one that comes back (put back by its attempt, queued by the committer
    /// after the purge read its cycle) is dropped instead ([`DueIndex::drop_lane`]).
    dropped: HashMap<Lane, u128>,
    /// Single purged deliveries of a lane that others share (operator events about a purged
    /// account): dropped like [`Self::dropped`]'s ([`DueIndex::drop_deliveries`]).
    dropped_deliveries: std::collections::HashSet<u128>,
}

impl Inner {
    /// Whether `delivery`'s event went with a purge of its lane's account.
    fn is_dropped(&self, lane: Lane, delivery: u128) -> bool {
        self.dropped_deliveries.contains(&delivery)
            || self.dropped.get(&lane).is_some_and(|&upto| {
                ids::event_of(delivery).is_some_and(|(event, _)| event <= upto)
            })
    }

    /// [`DueIndex::ended`]: `delivery` leaves its sequence, and if it headed it, the next
    /// member goes into the queues (passing over members a purge dropped); whether one did.
    fn end(&mut self, lane: Lane, delivery: u128) -> bool {
        let Some(q) = self.lanes.get_mut(&lane) else {
            return false;
        };
        let Some(seq) = q.sequence_of.remove(&delivery) else {
            return false;
        };
        let Some(members) = q.sequences.get_mut(&seq) else {
            return false;
        };
        let mut next = None;
        let mut left = 0;
        if members.front().is_some_and(|m| m.1 == delivery) {
            members.pop_front();
            while let Some(m) = members.front().copied() {
                let dropped = self.dropped_deliveries.contains(&m.1)
                    || self.dropped.get(&lane).is_some_and(|&upto| {
                        ids::event_of(m.1).is_some_and(|(event, _)| event <= upto)
                    });
                if !dropped {
                    next = Some(m);
                    break;
                }
                members.pop_front();
                q.sequence_of.remove(&m.1);
                left += 1;
            }
        } else if let Some(pos) = members.iter().position(|m| m.1 == delivery) {
            members.remove(pos);
            left += 1;
        }
        if members.is_empty() {
            q.sequences.remove(&seq);
        }
        self.len -= left;
        let Some((at, delivery, fresh)) = next else {
            return false;
        };
        // It leaves the waiting count and enters the queues as the head.
        self.len -= 1;
        self.push(
            Entry {
                lane,
                at,
                delivery,
                fresh,
                sequence: None,
            },
            false,
        );
        true
    }

    /// A handed-out entry came back ([`DueIndex::done`], [`DueIndex::put_back`]); one a
    /// purge dropped meanwhile also leaves its sequence, so the next may go.
    fn given_back(&mut self, lane: Lane, delivery: u128) {
        let Some(q) = self.lanes.get_mut(&lane) else {
            return;
        };
        if let Some(pos) = q.running.iter().position(|d| *d == delivery) {
            q.running.swap_remove(pos);
        }
        if !(self.dropped.is_empty() && self.dropped_deliveries.is_empty())
            && self.is_dropped(lane, delivery)
        {
            self.end(lane, delivery);
        }
    }

    /// Puts the lane's `ready` key in line with its queue and its hold.
    fn refresh(&mut self, lane: Lane) {
        let Some(q) = self.lanes.get_mut(&lane) else {
            return;
        };
        let want = q
            .earliest()
            .map(|at| q.held_until.map_or(at, |h| h.max(at)));
        if want != q.ready_at {
            if let Some(old) = q.ready_at {
                self.ready.remove(&(old, lane));
            }
            if let Some(at) = want {
                self.ready.insert((at, lane));
            }
            q.ready_at = want;
        }
        if q.is_empty() && q.running.is_empty() && q.held_until.is_none() {
            self.lanes.remove(&lane);
        }
    }

    /// Adds an entry; `back_in` puts a fresh entry back at the head of its deque (it was
    /// taken from there), instead of behind the newer ones. An entry of a sequence whose head
    /// is another delivery waits in the sequence instead (a delivery already in one stays in
    /// it, whatever `e.sequence` says).
    fn push(&mut self, e: Entry, back_in: bool) -> bool {
        let Entry {
            lane,
            at,
            delivery,
            fresh,
            sequence,
        } = e;
        if !(self.dropped.is_empty() && self.dropped_deliveries.is_empty())
            && self.is_dropped(lane, delivery)
        {
            return false;
        }
        let total = self.fresh_total;
        let q = self.lanes.entry(lane).or_default();
        let known = q.sequence_of.get(&delivery).copied();
        let in_sequence = known.or(sequence).is_some();
        if let Some(seq) = known.or(sequence) {
            let members = q.sequences.entry(seq).or_default();
            match members.front() {
                // The head (again: a retry, or put back): into the queues.
                Some(head) if head.1 == delivery => {}
                // A new sequence: this is its head.
                None => {
                    members.push_back((at, delivery, fresh));
                    q.sequence_of.insert(delivery, seq);
                }
                // Waiting behind the head: a new member, or one rescheduled.
                Some(_) => {
                    let pos = members.partition_point(|m| m.1 < delivery).max(1);
                    if known.is_some() {
                        if let Some(m) = members.get_mut(pos).filter(|m| m.1 == delivery) {
                            *m = (at, delivery, fresh);
                        }
                        return false;
                    }
                    members.insert(pos, (at, delivery, fresh));
                    q.sequence_of.insert(delivery, seq);
                    self.len += 1;
                    return true;
                }
            }
        }
        let added = if fresh {
            if back_in {
                q.fresh.push_front(Slot::new(at, delivery));
                self.fresh_total += 1;
            } else if in_sequence {
                // Not counted in `fresh_max`: sequence heads never spill, and a head newer than
                // the spilled entries must not make a refill take those for ones in memory.
                q.fresh.push_back(Slot::new(at, delivery));
                self.fresh_total += 1;
            } else if !q.spills(delivery, total) {
                q.fresh.push_back(Slot::new(at, delivery));
                q.fresh_max = q.fresh_max.max(delivery);
                self.fresh_total += 1;
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
    /// Adds a due delivery. `fresh`: its first attempt, due since ingest. A delivery in a
    /// sequence stays in it.
    pub fn insert(&self, lane: Lane, at: Millis, delivery: u128, fresh: bool) {
        self.insert_many([Entry {
            lane,
            at,
            delivery,
            fresh,
            sequence: None,
        }]);
    }

    pub fn insert_many(&self, entries: impl IntoIterator<Item = Entry>) {
        let mut inner = self.lock();
        let mut grew = false;
        for e in entries {
            if inner.push(e, false) {
                inner.refresh(e.lane);
                grew = true;
            }
        }
        drop(inner);
        if grew {
            // A stored permit when nobody waits: the engine cannot miss a wake-up.
            self.changed.notify_one();
        }
    }

    /// The delivery left `pending` (it ended): if it heads a sequence, the next of that
    /// sequence goes into the queues; if it waits in one, it leaves it. Nothing happens for a
    /// delivery in no sequence.
    pub fn ended(&self, lane: Lane, delivery: u128) {
        let mut inner = self.lock();
        let next = inner.end(lane, delivery);
        inner.refresh(lane);
        drop(inner);
        if next {
            self.changed.notify_one();
        }
    }

    /// Forgets every entry of `lane` that waits (in memory, spilled, behind a sequence's
    /// head): its endpoint and its deliveries of events up to `upto` are gone (an account's
    /// purge). Entries it handed out stay running until they are given back, and are dropped
    /// then, as is any of those events' entry added later, until [`Self::forget_dropped`].
    pub fn drop_lane(&self, lane: Lane, upto: u128) {
        let mut inner = self.lock();
        let bound = inner.dropped.entry(lane).or_default();
        *bound = (*bound).max(upto);
        let Some(q) = inner.lanes.get_mut(&lane) else {
            return;
        };
        let fresh = q.fresh.len();
        let waiting = fresh + q.later.len() + q.waiting() + q.spill.as_ref().map_or(0, |s| s.out);
        q.fresh.clear();
        q.later.clear();
        q.sequences.clear();
        q.sequence_of.clear();
        q.spill = None;
        inner.len = inner.len.saturating_sub(waiting);
        inner.fresh_total = inner.fresh_total.saturating_sub(fresh);
        inner.refills.retain(|r| r.lane != lane);
        inner.refresh(lane);
    }

    /// Whether `delivery` went with its account's purge ([`Self::drop_lane`]): an entry of it
    /// that comes up is dropped without touching the counts, which the purge kept.
    pub fn is_dropped(&self, lane: Lane, delivery: u128) -> bool {
        let inner = self.lock();
        !(inner.dropped.is_empty() && inner.dropped_deliveries.is_empty())
            && inner.is_dropped(lane, delivery)
    }

    /// Like [`Self::drop_lane`] for single deliveries of a lane that goes on (an operator
    /// endpoint's): each waiting entry of them goes, from the queues and from its sequence
    /// (the next of which goes on; after a running one, once it is given back), a spilled one
    /// is never read back, and one that comes back is dropped, until
    /// [`Self::forget_dropped_deliveries`] (once [`Self::holds_any`] says none is out).
    pub fn drop_deliveries(&self, lane: Lane, deliveries: &[u128]) {
        let mut inner = self.lock();
        inner.dropped_deliveries.extend(deliveries.iter().copied());
        let Some(q) = inner.lanes.get_mut(&lane) else {
            return;
        };
        let gone: std::collections::HashSet<u128> = deliveries.iter().copied().collect();
        let (fresh, later) = (q.fresh.len(), q.later.len());
        q.fresh.retain(|s| !gone.contains(&s.get().1));
        q.later.retain(|(_, d)| !gone.contains(d));
        let fresh_gone = fresh - q.fresh.len();
        let removed = fresh_gone + later - q.later.len();
        let sequenced: Vec<u128> = deliveries
            .iter()
            .copied()
            .filter(|d| q.sequence_of.contains_key(d) && !q.running.contains(d))
            .collect();
        inner.len = inner.len.saturating_sub(removed);
        inner.fresh_total = inner.fresh_total.saturating_sub(fresh_gone);
        let mut next = false;
        for d in sequenced {
            next |= inner.end(lane, d);
        }
        inner.refresh(lane);
        drop(inner);
        if next {
            self.changed.notify_one();
        }
    }

    /// Whether an entry of these deliveries of `lane` may still come up: one is handed out,
    /// waits in a sequence, or a refill of the lane is under way (it may have read one from
    /// sled before the purge removed it).
    pub fn holds_any(&self, lane: Lane, deliveries: &[u128]) -> bool {
        let inner = self.lock();
        let Some(q) = inner.lanes.get(&lane) else {
            return false;
        };
        q.spill.as_ref().is_some_and(|s| s.refill.is_some())
            || deliveries
                .iter()
                .any(|d| q.running.contains(d) || q.sequence_of.contains_key(d))
    }

    /// Ends [`Self::drop_deliveries`]'s drop of these deliveries.
    pub fn forget_dropped_deliveries(&self, deliveries: &[u128]) {
        let mut inner = self.lock();
        for d in deliveries {
            inner.dropped_deliveries.remove(d);
        }
    }

    /// Whether `lane` has no entry waiting or running.
    pub fn lane_idle(&self, lane: Lane) -> bool {
        self.lock()
            .lanes
            .get(&lane)
            .is_none_or(|q| q.is_empty() && q.running.is_empty())
    }

    /// Ends [`Self::drop_lane`]'s bound of `lane` (no entry of the purged events is left).
    pub fn forget_dropped(&self, lane: Lane) {
        self.lock().dropped.remove(&lane);
    }

    /// The delivery ahead of `delivery` in its sequence, if it waits behind another.
    pub fn ahead_of(&self, lane: Lane, delivery: u128) -> Option<u128> {
        let inner = self.lock();
        let q = inner.lanes.get(&lane)?;
        let members = q.sequences.get(q.sequence_of.get(&delivery)?)?;
        let pos = members.iter().position(|m| m.1 == delivery)?;
        pos.checked_sub(1).map(|p| members[p].1)
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
    /// `allowed(lane)` from a lane; each counts as running in its lane until [`Self::done`] or
    /// [`Self::put_back`].
    pub fn take(&self, now: Millis, max: usize, allowed: impl Fn(Lane) -> usize) -> Vec<Due> {
        let mut inner = self.lock();
        let mut out = Vec::new();
        // What this take handed out of each lane it took from.
        let mut given: HashMap<Lane, usize> = HashMap::new();
        // Lanes before this key are used up for this take (or not due): taking from a lane
        // only moves its own key later, so the walk never goes back.
        let mut from = (Millis::MIN, NO_LANE);
        while out.len() < max {
            let next = inner
                .ready
                .range(from..)
                .take_while(|(at, _)| *at <= now)
                .find(|(_, lane)| given.get(lane).copied().unwrap_or(0) < allowed(*lane))
                .copied();
            let Some((at, lane)) = next else {
                break;
            };
            from = (at, lane);
            *given.entry(lane).or_default() += 1;
            let total = inner.fresh_total;
            let q = inner.lanes.get_mut(&lane).expect("a ready lane exists");
            if let Some((due, delivery, fresh)) = q.pop() {
                q.running.push(delivery);
                let job = q.refill_job(lane, total);
                inner.len -= 1;
                if fresh {
                    inner.fresh_total -= 1;
                }
                inner.refills.extend(job);
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
    pub fn done(&self, lane: Lane, delivery: u128) {
        let mut inner = self.lock();
        inner.given_back(lane, delivery);
        inner.refresh(lane);
        drop(inner);
        self.changed.notify_one();
    }

    /// An entry from [`Self::take`] was not attempted after all: back in its lane, and, with
    /// `hold_until`, its whole lane waits until then (an open circuit breaker).
    pub fn put_back(&self, due: Due, hold_until: Option<Millis>) {
        let mut inner = self.lock();
        // A purged event's entry goes, and holds its (gone) endpoint's lane no more.
        let hold_until = hold_until.filter(|_| !inner.is_dropped(due.lane, due.delivery));
        inner.push(
            Entry {
                lane: due.lane,
                at: due.at,
                delivery: due.delivery,
                fresh: due.fresh,
                sequence: None,
            },
            true,
        );
        inner.given_back(due.lane, due.delivery);
        if let Some(q) = inner.lanes.get_mut(&due.lane) {
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
    /// are due at some time), those behind a sequence's head included.
    pub fn lane_len(&self, lane: Lane) -> usize {
        self.lock().lanes.get(&lane).map_or(0, |q| {
            let out = q.spill.as_ref().map_or(0, |s| s.out);
            q.fresh.len() + q.later.len() + q.running.len() + q.waiting() + out
        })
    }

    /// The earliest due time of any entry, held lanes and sequences included (the oldest
    /// pending delivery's; of a sequence's waiting ones, the first is taken as its oldest).
    pub fn oldest(&self) -> Option<Millis> {
        self.lock()
            .lanes
            .values()
            .flat_map(|q| {
                // Spilled entries are newer than the lane's entries in memory.
                let spilled = q.spill.as_ref().map(|s| ids::ulid_ms(s.from));
                let earliest = match (q.earliest(), spilled) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                earliest
                    .into_iter()
                    .chain(q.sequences.values().filter_map(|m| m.get(1).map(|e| e.0)))
            })
            .min()
    }

    /// When the earliest entry that [`Self::take`] could hand out is due, of the lanes it may
    /// take from (`allowed(lane) > 0`).
    pub fn next_due(&self, allowed: impl Fn(Lane) -> usize) -> Option<Millis> {
        self.lock()
            .ready
            .iter()
            .find(|(_, lane)| allowed(*lane) > 0)
            .map(|(at, _)| *at)
    }

    /// Refills due now: lanes whose fresh entries in memory ran low while newer ones wait in
    /// sled. The caller reads each one's entries and hands them to [`Self::refilled`] (or
    /// [`Self::refill_failed`]).
    pub fn refills(&self) -> Vec<Refill> {
        std::mem::take(&mut self.lock().refills)
    }

    /// Whether refills wait to be handed out.
    pub fn has_refills(&self) -> bool {
        !self.lock().refills.is_empty()
    }

    /// A refill's entries, read from sled: the lane's fresh deliveries from the job's `from`,
    /// as (due time, delivery) in ULID order; `next` is where the next refill reads from, past
    /// the job's `bound` if it read everything up to it.
    pub fn refilled(&self, job: Refill, found: &[(Millis, u128)], next: u128) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let mut added = 0;
        let Some(q) = inner.lanes.get_mut(&job.lane) else {
            return;
        };
        let Some(s) = q.spill.as_mut() else {
            return;
        };
        let Some((bound, since)) = s.refill.take() else {
            return;
        };
        let dropping = !(inner.dropped.is_empty() && inner.dropped_deliveries.is_empty());
        for &(at, delivery) in found {
            // Never twice in memory: one in a sequence, or in the deque already. Nor one a
            // purge dropped after the refill read it (counted out as not found).
            if q.sequence_of.contains_key(&delivery)
                || delivery <= q.fresh_max
                || (dropping && inner.dropped_deliveries.contains(&delivery))
            {
                continue;
            }
            q.fresh.push_back(Slot::new(at, delivery));
            q.fresh_max = delivery;
            added += 1;
        }
        s.out = s.out.saturating_sub(added);
        let mut stale = 0;
        if next > bound {
            // Read to the bound: what is still out is exactly what spilled since.
            stale = s.out - since.min(s.out);
            s.out = since;
            s.from = next;
            if since == 0 {
                q.spill = None;
            }
        } else {
            s.from = next;
        }
        let total = inner.fresh_total + added;
        let q = inner.lanes.get_mut(&job.lane).expect("the lane is there");
        let again = q.refill_job(job.lane, total);
        inner.fresh_total = total;
        inner.len -= stale;
        inner.refills.extend(again);
        inner.refresh(job.lane);
        drop(guard);
        self.changed.notify_one();
    }

    /// A refill could not read its entries: it is handed out again.
    pub fn refill_failed(&self, job: Refill) {
        let mut inner = self.lock();
        let total = inner.fresh_total;
        let Some(q) = inner.lanes.get_mut(&job.lane) else {
            return;
        };
        if let Some(s) = q.spill.as_mut() {
            s.refill = None;
        }
        let again = q.refill_job(job.lane, total);
        inner.refills.extend(again);
    }

    /// Entries waiting (not running), those behind a sequence's head included.
    pub fn len(&self) -> usize {
        self.lock().len
    }

    /// What waits in each lane that has anything waiting at `now`: entries not handed out (in
    /// the queues, spilled, or behind their sequence's head), of which due at `now` and not
    /// behind a head (none while the lane is held: take hands out nothing of it), and behind
    /// a head. Spilled entries are first attempts, due since ingest.
    pub fn waiting(&self, now: Millis) -> Vec<LaneWaiting> {
        let inner = self.lock();
        inner
            .lanes
            .iter()
            .filter_map(|(&lane, q)| {
                let spilled = q.spill.as_ref().map_or(0, |s| s.out) as u64;
                let behind = q.waiting() as u64;
                // First attempts sit in time order (as `take` relies on): a search, not a
                // walk, so a status read holds the index a moment whatever the backlog.
                let fresh_due = q.fresh.partition_point(|e| e.at <= now) as u64;
                let later_due = q.later.range(..=(now, u128::MAX)).count() as u64;
                let held = q.held_until.is_some_and(|h| h > now);
                let w = LaneWaiting {
                    lane,
                    waiting: (q.fresh.len() + q.later.len()) as u64 + spilled + behind,
                    due: if held {
                        0
                    } else {
                        fresh_due + later_due + spilled
                    },
                    behind,
                };
                (w.waiting > 0).then_some(w)
            })
            .collect()
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

    /// Fresh entries in memory, all lanes (the rest of `len` spilled or in `later`).
    #[cfg(test)]
    pub(crate) fn fresh_in_memory(&self) -> usize {
        let inner = self.lock();
        let counted: usize = inner.lanes.values().map(|q| q.fresh.len()).sum();
        assert_eq!(counted, inner.fresh_total);
        counted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A take's allowance that limits no lane.
    fn any(_: Lane) -> usize {
        usize::MAX
    }

    fn ids(v: &[Due]) -> Vec<u128> {
        v.iter().map(|d| d.delivery).collect()
    }

    #[test]
    fn a_fresh_slot_is_24_bytes_and_keeps_its_delivery() {
        assert_eq!(std::mem::size_of::<Slot>(), 24);
        for d in [0, 1, u128::MAX, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210] {
            assert_eq!(Slot::new(-5, d).get(), (-5, d));
        }
    }

    /// What sled would hold: each lane's fresh deliveries, delivery → due time; a refill
    /// reads from it as the store's walk does.
    type Sled = HashMap<Lane, std::collections::BTreeMap<u128, Millis>>;

    fn answer(sled: &Sled, job: &Refill) -> (Vec<(Millis, u128)>, u128) {
        let mut found = Vec::new();
        let mut next = job.bound + 1;
        if let Some(rows) = sled.get(&job.lane) {
            for (&delivery, &at) in rows.range(job.from..=job.bound) {
                found.push((at, delivery));
                if found.len() == job.want {
                    next = delivery + 1;
                    break;
                }
            }
        }
        (found, next)
    }

    fn serve(d: &DueIndex, sled: &Sled) -> usize {
        let jobs = d.refills();
        for job in &jobs {
            let (found, next) = answer(sled, job);
            d.refilled(*job, &found, next);
        }
        jobs.len()
    }

    /// Takes everything due at `now`, serving refills, until nothing more comes.
    fn drain(d: &DueIndex, sled: &mut Sled, now: Millis) -> Vec<u128> {
        let mut out = Vec::new();
        loop {
            let got = d.take(now, 500, any);
            for e in &got {
                d.done(e.lane, e.delivery);
                // Attempted: no longer fresh.
                sled.get_mut(&e.lane).unwrap().remove(&e.delivery);
            }
            out.extend(ids(&got));
            if got.is_empty() && serve(d, sled) == 0 {
                return out;
            }
        }
    }

    #[test]
    fn a_backlog_spills_past_the_lane_limit_and_comes_back_in_order() {
        let d = DueIndex::default();
        let n = LANE_FRESH as u128 * 3 + 77;
        // Delivery i: a ULID of millisecond i, due then.
        let ulid = |i: u128| i << 80;
        let mut sled = Sled::new();
        for i in 1..=n {
            sled.entry(7).or_default().insert(ulid(i), i as Millis);
            d.insert(7, i as Millis, ulid(i), true);
        }
        assert_eq!(d.len(), n as usize);
        assert_eq!(d.lane_len(7), n as usize);
        assert_eq!(d.fresh_in_memory(), LANE_FRESH, "the rest spilled");
        assert_eq!(d.oldest(), Some(1));

        // Taken past the low mark: a refill job, from the oldest spilled to the newest.
        let first = d.take(i64::MAX, LANE_FRESH - LANE_LOW, any);
        assert_eq!(first.len(), LANE_FRESH - LANE_LOW);
        let jobs = d.refills();
        assert_eq!(
            jobs,
            vec![Refill {
                lane: 7,
                from: ulid(LANE_FRESH as u128 + 1),
                bound: ulid(n),
                want: LANE_FRESH - LANE_LOW,
            }]
        );
        // Spilled while it reads: counted, read by a later refill.
        sled.get_mut(&7).unwrap().insert(ulid(n + 1), 0);
        d.insert(7, 0, ulid(n + 1), true);
        // One of the spilled ended meanwhile (a manual retry made it a later entry).
        sled.get_mut(&7).unwrap().remove(&ulid(n - 5));
        let (found, next) = answer(&sled, &jobs[0]);
        d.refilled(jobs[0], &found, next);
        assert_eq!(d.fresh_in_memory(), LANE_FRESH);
        assert_eq!(d.len(), n as usize + 1 - first.len());

        let mut got = ids(&first);
        for e in &first {
            d.done(e.lane, e.delivery);
            sled.get_mut(&7).unwrap().remove(&e.delivery);
        }
        got.extend(drain(&d, &mut sled, i64::MAX));
        let want: Vec<u128> = (1..=n + 1).filter(|&i| i != n - 5).map(ulid).collect();
        assert_eq!(got, want, "every fresh entry once, in order");
        assert!(d.is_empty(), "{} left", d.len());
        assert_eq!(d.lane_len(7), 0);
        assert!(d.lock().lanes.is_empty(), "the spill ended");
    }

    /// A lane's backlog spilled; then its endpoint became ordered, and sequence heads newer
    /// than every spilled entry went into the deque. The refill still reads the spilled ones
    /// back: all 5,010 come out once each.
    #[test]
    fn a_spilled_backlog_comes_back_after_the_lane_gets_sequences() {
        let d = DueIndex::default();
        let mut sled = Sled::new();
        for i in 1..=5_000u128 {
            sled.entry(7).or_default().insert(i, 0);
            d.insert(7, 0, i, true);
        }
        assert!(d.fresh_in_memory() < 5_000, "part of it spilled");
        d.insert_many((5_001..=5_010u128).map(|i| seq(7, 0, i, i as u64)));
        let mut out = Vec::new();
        loop {
            let got = d.take(0, 500, any);
            for e in &got {
                if e.delivery > 5_000 {
                    d.ended(7, e.delivery);
                } else {
                    sled.get_mut(&7).unwrap().remove(&e.delivery);
                }
                d.done(e.lane, e.delivery);
            }
            out.extend(ids(&got));
            if got.is_empty() && serve(&d, &sled) == 0 {
                break;
            }
        }
        out.sort_unstable();
        assert_eq!(out, (1..=5_010u128).collect::<Vec<_>>(), "every entry once");
        assert!(d.is_empty(), "{} left", d.len());
    }

    #[test]
    fn lanes_together_keep_a_bounded_number_in_memory() {
        let d = DueIndex::default();
        let lanes = 100u128;
        let per = 4_000u128;
        let mut sled = Sled::new();
        // Interleaved, as traffic to many endpoints arrives.
        for i in 0..per {
            for lane in 1..=lanes {
                let delivery = i * lanes + lane;
                sled.entry(lane)
                    .or_default()
                    .insert(delivery, delivery as Millis);
                d.insert(lane, delivery as Millis, delivery, true);
            }
        }
        assert_eq!(d.len(), (lanes * per) as usize);
        let held = d.fresh_in_memory();
        assert!(held <= ALL_FRESH + LANE_FLOOR, "{held} in memory");
        let got = drain(&d, &mut sled, i64::MAX);
        assert_eq!(got.len(), (lanes * per) as usize);
        let mut sorted = got.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), got.len(), "none twice");
        assert!(d.is_empty());
    }

    #[test]
    fn sequences_and_put_back_entries_never_spill() {
        let d = DueIndex::default();
        for i in 1..=LANE_FRESH as u128 {
            d.insert(1, 0, i, true);
        }
        let over = LANE_FRESH as u128 + 1;
        d.insert_many([seq(1, 0, over, 3)]);
        assert_eq!(
            d.fresh_in_memory(),
            LANE_FRESH + 1,
            "the sequence's head is in memory"
        );
        d.insert(1, 0, over + 1, true);
        assert_eq!(d.fresh_in_memory(), LANE_FRESH + 1, "spilled");
        let e = d.take(0, 1, any)[0];
        d.put_back(e, None);
        assert_eq!(d.fresh_in_memory(), LANE_FRESH + 1);
        assert_eq!(d.len(), LANE_FRESH + 2);
    }

    #[test]
    fn hands_out_only_what_is_due_earliest_first() {
        let d = DueIndex::default();
        d.insert(1, 30, 3, false);
        d.insert(1, 10, 1, true);
        d.insert(2, 20, 2, true);
        assert_eq!(d.next_due(any), Some(10));
        assert_eq!(ids(&d.take(20, 10, any)), vec![1, 2]);
        assert_eq!(d.take(20, 10, any), vec![]);
        assert_eq!(d.len(), 1);
        d.remove(1, 30, 3);
        assert!(d.is_empty());
    }

    #[test]
    fn a_lane_the_caller_allows_nothing_is_passed_over_by_take_and_next_due() {
        let d = DueIndex::default();
        for i in 0..3 {
            d.insert(1, 0, 10 + i, true);
        }
        d.insert(2, 5, 99, true);
        d.insert(3, 7, 77, true);
        let only_one_of_1 = |lane: Lane| if lane == 1 { 1 } else { usize::MAX };
        assert_eq!(ids(&d.take(10, 100, only_one_of_1)), vec![10, 99, 77]);
        let none_of_1 = |lane: Lane| if lane == 1 { 0 } else { usize::MAX };
        d.insert(2, 20, 98, true);
        assert_eq!(d.next_due(any), Some(0), "lane 1 waits, due since 0");
        assert_eq!(
            d.next_due(none_of_1),
            Some(20),
            "past lane 1 to lane 2's next"
        );
        assert_eq!(d.take(20, 100, none_of_1).len(), 1);
        assert_eq!(d.next_due(none_of_1), None);
        assert_eq!(ids(&d.take(20, 100, any)), vec![11, 12]);
    }

    #[test]
    fn a_held_lane_hands_out_nothing_until_released_or_the_hold_ends() {
        let d = DueIndex::default();
        d.insert(1, 0, 1, true);
        d.insert(1, 0, 2, true);
        let first = d.take(0, 1, any)[0];
        d.put_back(first, Some(1_000));
        assert_eq!(d.take(999, 10, any), vec![]);
        assert_eq!(d.next_due(any), Some(1_000));
        d.release(1);
        assert_eq!(ids(&d.take(0, 10, any)), vec![1, 2]);
    }

    fn seq(lane: Lane, at: Millis, delivery: u128, sequence: u64) -> Entry {
        Entry {
            lane,
            at,
            delivery,
            fresh: true,
            sequence: Some(sequence),
        }
    }

    #[test]
    fn a_sequence_hands_out_its_head_only_and_keys_go_in_parallel() {
        let d = DueIndex::default();
        d.insert_many([
            seq(1, 0, 1, 7),
            seq(1, 0, 2, 7),
            seq(1, 0, 3, 7),
            seq(1, 0, 4, 9),
        ]);
        d.insert(1, 0, 5, true); // unordered, same lane
        assert_eq!((d.len(), d.lane_len(1)), (5, 5));
        assert_eq!(d.ahead_of(1, 3), Some(2));
        assert_eq!(d.ahead_of(1, 1), None);
        assert_eq!(ids(&d.take(0, 10, any)), vec![1, 4, 5]);
        assert_eq!(d.take(0, 10, any), vec![], "2 waits for 1");
        // The head's retry keeps its key waiting.
        d.insert(1, 50, 1, false);
        d.done(1, 1);
        assert_eq!(d.take(49, 10, any), vec![]);
        assert_eq!(ids(&d.take(50, 10, any)), vec![1]);
        d.ended(1, 1);
        d.done(1, 1);
        assert_eq!(ids(&d.take(50, 10, any)), vec![2]);
        assert_eq!(d.ahead_of(1, 3), Some(2));
        d.ended(1, 2);
        d.done(1, 2);
        assert_eq!(ids(&d.take(50, 10, any)), vec![3]);
        for x in [3, 4, 5] {
            d.ended(1, x);
            d.done(1, x);
        }
        assert!(d.is_empty());
        assert_eq!(d.lane_len(1), 0);
    }

    /// Deliveries of a lane that goes on, dropped by a purge (operator events about a purged
    /// account), leave their sequences: one waiting behind the head at once, a head waiting in
    /// the queues at once (the next goes), a running head when it is given back. Until then
    /// the index says it holds them. Before, a dropped head stayed at the front of its
    /// sequence and the deliveries behind it waited for ever.
    #[test]
    fn dropped_deliveries_leave_their_sequences_and_the_next_goes() {
        let d = DueIndex::default();
        d.insert_many([seq(1, 0, 1, 7), seq(1, 0, 2, 7), seq(1, 0, 3, 7)]);
        d.insert_many([seq(1, 0, 10, 8), seq(1, 0, 11, 8)]);
        let running = d.take(0, 10, any);
        assert_eq!(ids(&running), vec![1, 10]);
        // 11 waits behind 10 (running); 10 ends; 11 is dropped while in the queues.
        d.ended(1, 10);
        d.done(1, 10);
        d.drop_deliveries(1, &[11]);
        assert!(!d.holds_any(1, &[11]));
        // 2 waits behind 1; 1 is running.
        d.drop_deliveries(1, &[2, 1]);
        assert!(d.holds_any(1, &[1]), "1 is out");
        assert!(!d.holds_any(1, &[2]), "2 left its sequence");
        assert_eq!(d.take(0, 10, any), vec![], "3 waits for 1 to come back");
        // The attempt of 1 comes back (its breaker held it, say): it is dropped, 3 goes.
        d.put_back(running[0], None);
        assert!(!d.holds_any(1, &[1, 2, 11]));
        assert_eq!(ids(&d.take(0, 10, any)), vec![3]);
        d.ended(1, 3);
        d.done(1, 3);
        assert!(d.is_empty(), "{} left", d.len());
        assert!(d.lock().lanes.is_empty());
    }

    /// A refill that read a delivery from sled before a purge removed it takes it in no more
    /// (it is counted out as if not found), and the index says it holds the lane's dropped
    /// deliveries while the refill is under way: a tombstone kept until then drops the entry
    /// instead of counting it out a second time.
    #[test]
    fn a_refill_takes_in_no_dropped_delivery() {
        let d = DueIndex::default();
        let n = LANE_FRESH as u128 + 10;
        let ulid = |i: u128| i << 80;
        let mut sled = Sled::new();
        for i in 1..=n {
            sled.entry(7).or_default().insert(ulid(i), i as Millis);
            d.insert(7, i as Millis, ulid(i), true);
        }
        let first = d.take(i64::MAX, LANE_FRESH - LANE_LOW, any);
        let jobs = d.refills();
        assert_eq!(jobs.len(), 1);
        // The refill reads its rows; then the purge drops one of them.
        let (found, next) = answer(&sled, &jobs[0]);
        let gone = ulid(LANE_FRESH as u128 + 3);
        assert!(found.iter().any(|f| f.1 == gone));
        d.drop_deliveries(7, &[gone]);
        sled.get_mut(&7).unwrap().remove(&gone);
        assert!(d.holds_any(7, &[gone]), "a refill is under way");
        d.refilled(jobs[0], &found, next);
        for e in &first {
            d.done(e.lane, e.delivery);
            sled.get_mut(&7).unwrap().remove(&e.delivery);
        }
        assert!(!d.holds_any(7, &[gone]));
        let mut got = ids(&first);
        got.extend(drain(&d, &mut sled, i64::MAX));
        let want: Vec<u128> = (1..=n).map(ulid).filter(|u| *u != gone).collect();
        assert_eq!(got, want, "every other entry once, in order");
        assert!(d.is_empty(), "{} left", d.len());
    }

    #[test]
    fn a_waiting_member_that_ends_leaves_its_sequence_and_keeps_its_place_when_rescheduled() {
        let d = DueIndex::default();
        d.insert_many([seq(1, 0, 10, 7), seq(1, 0, 11, 7), seq(1, 0, 12, 7)]);
        // Rescheduled while waiting (a manual retry of a pending one): it stays in line.
        d.insert(1, 5, 12, false);
        assert_eq!(d.len(), 3);
        assert_eq!(ids(&d.take(100, 10, any)), vec![10]);
        assert_eq!(d.len(), 2);
        d.ended(1, 11); // superseded while waiting
        assert_eq!(d.len(), 1);
        d.ended(1, 10);
        d.done(1, 10);
        let next = d.take(100, 10, any);
        assert_eq!(ids(&next), vec![12]);
        assert_eq!((next[0].at, next[0].fresh), (5, false));
        // Ending a delivery in no sequence, or twice, changes nothing.
        d.ended(1, 10);
        d.ended(2, 99);
        assert_eq!(d.lane_len(1), 1, "12 running");
    }

    #[test]
    fn out_of_order_arrivals_take_their_place_behind_the_head() {
        let d = DueIndex::default();
        d.insert_many([seq(1, 0, 20, 7), seq(1, 0, 40, 7), seq(1, 0, 30, 7)]);
        assert_eq!(d.ahead_of(1, 40), Some(30));
        assert_eq!(d.ahead_of(1, 30), Some(20));
        assert_eq!(d.oldest(), Some(0));
    }
}
