//! Counts kept in memory: deliveries by state (sled's `len` scans the whole tree) and fresh
//! deliveries by second (the fresh watermark without a scan).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

use herald_core::clock::Millis;
use herald_core::ids;
use herald_core::model::DeliveryState;

/// Deliveries by state, kept in memory (sled's `len` scans the whole tree).
#[derive(Debug, Default)]
pub struct Counts {
    by_state: [AtomicI64; 4],
}

impl Counts {
    pub(super) fn count(&self, from: Option<DeliveryState>, to: DeliveryState) {
        if from == Some(to) {
            return;
        }
        if let Some(from) = from {
            self.by_state[from as usize].fetch_sub(1, Ordering::Relaxed);
        }
        self.by_state[to as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn forget(&self, state: DeliveryState) {
        self.by_state[state as usize].fetch_sub(1, Ordering::Relaxed);
    }

    pub fn get(&self, state: DeliveryState) -> i64 {
        self.by_state[state as usize].load(Ordering::Relaxed)
    }

    pub(super) fn snapshot(&self) -> [i64; 4] {
        DeliveryState::ALL.map(|s| self.get(s))
    }

    /// The counts as they are now, in a value of their own.
    pub fn copy(&self) -> herald_store::Stats {
        let mut copy = herald_store::Stats::default();
        for s in DeliveryState::ALL {
            copy.set(s, self.get(s));
        }
        copy
    }

    pub(super) fn set(&self, state: DeliveryState, n: i64) {
        self.by_state[state as usize].store(n, Ordering::Relaxed);
    }
}

/// Fresh deliveries not yet attempted, counted per second of their ULID's time, so the fresh
/// watermark is known without a scan.
#[derive(Debug, Default)]
pub(crate) struct Fresh {
    buckets: BTreeMap<Millis, u32>,
    /// The newest event ULID made: every later event's is greater.
    pub(super) last_event: u128,
    /// The newest event ULID whose commit cycle is over: its entries are in the due index (or,
    /// the cycle failed, never will be).
    pub(super) queued: u128,
}

impl Fresh {
    pub(super) fn add(&mut self, delivery: u128) {
        *self
            .buckets
            .entry(ids::ulid_ms(delivery).div_euclid(1000))
            .or_default() += 1;
    }

    pub(super) fn remove(&mut self, delivery: u128) {
        let second = ids::ulid_ms(delivery).div_euclid(1000);
        if let Some(n) = self.buckets.get_mut(&second) {
            *n -= 1;
            if *n == 0 {
                self.buckets.remove(&second);
            }
        }
    }

    /// A ULID below which no event has a fresh delivery.
    pub(super) fn watermark(&self) -> u128 {
        match self.buckets.first_key_value() {
            Some((second, _)) => ids::ulid_floor(second * 1000),
            None => self.last_event,
        }
    }
}
